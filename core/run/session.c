/* session.c - start-up and shut-down shared by the benchmark binaries (see session.h). */
#include "session.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "console.h"
#include "layer.h"
#include "binding.h"
#include "error.h"
#include "files.h"
#include "locality.h"
#include "rankmap.h"
#include "results.h"
#include "resume_check.h"
#include "runlock.h"
#include "vrun.h"
#include "watchdog.h"

#define NAME_BYTES 128

/* What each rank tells rank 0 about itself for run.json. */
struct rank_facts {
    char host[NAME_BYTES];
    char device[NAME_BYTES];
    int local_rank;
    struct mp_locality where;
};

/* The PCI bus id of the GPU this rank drives, or NULL. */
static const char *gpu_pci(const struct mp_session *s)
{
    return s->cops->pci_bus_id && s->dev ? s->cops->pci_bus_id(s->dev) : NULL;
}

/* Rank 0 of a measured run: one warning line, and run.json's binding_warning, when its ranks share
 * CPUs (mp_binding_problem; NCCL's proxy thread counts as a second thread per rank). */
static void check_binding(struct mp_session *s, const struct rank_facts *all, int n)
{
    struct mp_binding_rank *r = calloc((size_t)(n > 0 ? n : 1), sizeof *r);
    char why[768];
    if (!r)
        return; /* a check that cannot run warns of nothing */
    for (int i = 0; i < n; i++)
        r[i] = (struct mp_binding_rank){all[i].host, all[i].where.cpu_bind, all[i].where.bound};
    if (mp_binding_problem(r, n, strcmp(s->comm->ops->name, "nccl") == 0, why, sizeof why)) {
        mp_warn("%s", why);
        mp_session_note(s, "binding_warning", cJSON_CreateString(why));
    }
    free(r);
}

/* Per-rank host, device, local rank and placement facts into run.json (gathered to rank 0). The
 * model backends' virtual ranks run nowhere: they get no placement facts. */
static int note_ranks(struct mp_session *s, const char *local_rank_from)
{
    struct mp_comm *c = s->comm;
    struct rank_facts mine;
    memset(&mine, 0, sizeof mine);
    gethostname(mine.host, NAME_BYTES - 1);
    strncpy(mine.device, s->cops->device_name(s->dev), NAME_BYTES - 1);
    mine.local_rank = c->local_rank;
    if (!s->modelled)
        mp_locality_read(&mine.where, gpu_pci(s));
    struct rank_facts *all = c->rank == 0 ? calloc((size_t)c->size, sizeof mine) : NULL;
    if (c->rank == 0 && !all) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    int rc = c->ops->gather(c, &mine, sizeof mine, all);
    if (rc == MP_OK && c->rank == 0 && !s->modelled)
        check_binding(s, all, c->size);
    if (rc == MP_OK && s->run) {
        cJSON *ranks = cJSON_AddArrayToObject(s->run, "ranks");
        for (int r = 0; r < c->size; r++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "rank", r);
            cJSON_AddStringToObject(o, "host", all[r].host);
            cJSON_AddNumberToObject(o, "node", c->node_of[r]);
            cJSON_AddStringToObject(o, "device", all[r].device);
            if (!s->modelled) {
                cJSON_AddNumberToObject(o, "local_rank", all[r].local_rank);
                mp_locality_json(&all[r].where, o);
            }
            cJSON_AddItemToArray(ranks, o);
        }
        if (!s->modelled) {
            cJSON_AddStringToObject(s->run, "local_rank_from", local_rank_from);
            const char *policy = s->o.cpu_bind ? s->o.cpu_bind : "none";
            cJSON_AddStringToObject(s->run, "cpu_bind_policy", policy);
        }
        cJSON_AddNumberToObject(s->run, "world", c->size);
        cJSON_AddNumberToObject(s->run, "nodes", c->nnodes);
        cJSON *lib = cJSON_AddObjectToObject(s->run, "libraries");
        cJSON_AddStringToObject(lib, "comm", c->ops->name);
        cJSON_AddStringToObject(lib, "comm_version", c->ops->version(c));
        cJSON_AddStringToObject(lib, "compute", s->cops->name);
        cJSON_AddNumberToObject(lib, "compute_elem_bytes", (double)s->cops->elem_size);
    }
    free(all);
    return rc;
}

/* Where a rank's GPU is, as NCCL tells GPUs apart: the host (NCCL_HOSTID when set, as NCCL takes
 * it for its host hash, else the host name) and the device's PCI bus id. */
struct gpu_key {
    char host[NAME_BYTES];
    char pci[NAME_BYTES];
};

/* NCCL runs one rank per GPU of a host: refuse, on every rank alike and before NCCL's own
 * ncclCommInitRank refusal ("Duplicate GPU detected"), when two ranks drive one GPU. Ranks given
 * different NCCL_HOSTID values count as different hosts, as NCCL counts them (it then joins them
 * over its network transport). A collective; MP_ERR_USAGE when the launch doubles a GPU. */
static int check_gpus_distinct(struct mp_session *s)
{
    struct mp_comm *c = s->comm;
    struct gpu_key mine;
    memset(&mine, 0, sizeof mine);
    const char *hostid = getenv("NCCL_HOSTID");
    if (hostid && *hostid)
        snprintf(mine.host, NAME_BYTES, "NCCL_HOSTID %s", hostid);
    else
        gethostname(mine.host, NAME_BYTES - 1);
    snprintf(mine.pci, NAME_BYTES, "%s", gpu_pci(s) ? gpu_pci(s) : "");
    struct gpu_key *all = c->rank == 0 ? calloc((size_t)c->size, sizeof mine) : NULL;
    if (c->rank == 0 && !all) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    int rc = c->ops->gather(c, &mine, sizeof mine, all);
    int twin[2] = {-1, -1}; /* the first two ranks found on one GPU */
    for (int a = 0; rc == MP_OK && all && a < c->size && twin[0] < 0; a++)
        for (int b = a + 1; b < c->size && twin[0] < 0; b++)
            if (all[a].pci[0] && strcmp(all[a].pci, all[b].pci) == 0 &&
                strcmp(all[a].host, all[b].host) == 0) {
                twin[0] = a;
                twin[1] = b;
            }
    if (twin[0] >= 0) {
        int on_host = 0;
        for (int r = 0; r < c->size; r++)
            on_host += strcmp(all[r].host, all[twin[0]].host) == 0;
        mp_usage("ranks %d and %d both drive GPU %s on %s: NCCL runs one rank per GPU. Likely "
                 "causes: more ranks on that host (%d) than GPUs each rank sees, or a launcher "
                 "binding GPUs per rank (CUDA_VISIBLE_DEVICES set per rank, srun --gpu-bind, "
                 "--gpus-per-task) so that every rank sees its one GPU as device 0 and local ranks "
                 "1.. fall back onto it; launch one rank per GPU and leave each rank every GPU of "
                 "its host (or give each rank its own NCCL_HOSTID to test several ranks on one GPU "
                 "over NCCL's network transport)",
                 twin[0], twin[1], all[twin[0]].pci, all[twin[0]].host, on_host);
    }
    int verdict = twin[0] >= 0 ? MP_ERR_USAGE : MP_OK;
    free(all);
    if (rc == MP_OK)
        rc = c->ops->bcast(c, &verdict, sizeof verdict);
    if (rc != MP_OK)
        return rc;
    if (verdict != MP_OK)
        s->agreed = 1; /* every rank stops here alike: MPI ends cleanly */
    return verdict;
}

/* The tool named by the run.json in `dir`, into tool (len bytes): 1 when there is one, 0 when
 * there is no run.json, -1 when it is there but names no tool (not JSON, or another file). */
static int run_owner(const char *dir, char *tool, size_t len)
{
    char *path = mp_path_join(dir, "run.json");
    char *text = path ? mp_read_file(path, NULL) : NULL;
    free(path);
    if (!text)
        return 0;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *t = j ? cJSON_GetObjectItemCaseSensitive(j, "tool") : NULL;
    int found = cJSON_IsString(t) ? 1 : -1;
    snprintf(tool, len, "%s", found == 1 ? t->valuestring : "");
    cJSON_Delete(j);
    return found;
}

/* --resume and --force: each needs --out, and they exclude each other. */
static int check_out_flags(const struct mp_session *s)
{
    const char *flag = s->o.resume ? "--resume" : s->o.force ? "--force" : NULL;
    if (flag && !s->o.out) {
        mp_usage("%s: needs --out (the run directory to %s)", flag,
                 s->o.resume ? "add the missing points to" : "replace");
        return MP_ERR_USAGE;
    }
    if (s->o.resume && s->o.force) {
        mp_usage("--resume and --force exclude each other: --resume keeps the run in --out and "
                 "adds the points it lacks, --force replaces it");
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* --out, before anything is measured (rank 0): a new or empty directory is taken; one that holds
 * this tool's run only with --resume (its missing points are added) or --force (it is replaced
 * whole when the first row is written); another tool's run, or files that are no run, never.
 * Sets s->out_replace for --force. MP_OK or MP_ERR_USAGE after one line. */
static int check_out_dir(struct mp_session *s, const char *tool)
{
    const char *dir = s->o.out;
    struct stat st;
    if (stat(dir, &st) != 0)
        return MP_OK; /* made when the first row is written */
    if (!S_ISDIR(st.st_mode)) {
        mp_usage("--out: '%s' exists and is not a directory", dir);
        return MP_ERR_USAGE;
    }
    int entries = mp_dir_has_entries(dir);
    if (entries < 0) {
        mp_usage("--out: '%s': %s", dir, strerror(errno));
        return MP_ERR_USAGE;
    }
    char holder[256];
    enum mp_runlock_state lock;
    if (mp_runlock_take(dir, 0, &lock, &s->lock_fd, holder, sizeof holder) != MP_OK)
        return MP_ERR_USAGE;
    if (lock == MP_RUNLOCK_HELD) {
        mp_usage("--out: '%s' is being written by %s; wait until that run ends, or give another "
                 "directory", dir, holder);
        return MP_ERR_USAGE;
    }
    s->locked = lock == MP_RUNLOCK_TAKEN;
    if (entries == 0)
        return MP_OK;
    char owner[128];
    int found = run_owner(dir, owner, sizeof owner);
    if (found != 1) {
        mp_usage("--out: '%s' is not empty and holds no moeperf run (%s); give a new or empty "
                 "directory", dir, found == 0 ? "no run.json" : "its run.json names no tool");
        return MP_ERR_USAGE;
    }
    if (strcmp(owner, tool) != 0) {
        mp_usage("--out: '%s' holds a run of %s; give %s a directory of its own", dir, owner,
                 tool);
        return MP_ERR_USAGE;
    }
    if (!s->o.resume && !s->o.force) {
        mp_usage("--out: '%s' already holds a run of %s; give --resume to add the points it "
                 "lacks, --force to replace it, or another directory", dir, tool);
        return MP_ERR_USAGE;
    }
    s->out_replace = s->o.force;
    if (!s->o.resume)
        return MP_OK;
    struct mp_resume_settings now = {.dir = dir, .tool = tool, .backend = s->cops->name,
                                     .comm = s->comm->ops->name,
                                     .elem_bytes = (int)s->cops->elem_size,
                                     .cluster = s->modelled ? &s->cluster : NULL,
                                     .gemm = s->o.gemm};
    return mp_resume_check_settings(&now);
}

/* The memory kinds of backends, as predicates for the messages that name the built ones. */
static int compute_on_device(const struct mp_compute_ops *o)
{
    return o->memory == MP_MEMORY_DEVICE;
}
static int comm_on_device(const struct mp_comm_ops *o) { return o->memory == MP_MEMORY_DEVICE; }
static int compute_virtual(const struct mp_compute_ops *o)
{
    return o->memory == MP_MEMORY_VIRTUAL;
}
static int comm_virtual(const struct mp_comm_ops *o) { return o->memory == MP_MEMORY_VIRTUAL; }

/* A compute and a comm backend run together only on the same kind of memory: both virtual (a model
 * replaces the hardware as a whole), both on the host, or both on the device. --cpu-bind gpu needs
 * a backend that drives a device. */
static int check_pairing(const struct mp_session *s, const struct mp_comm_ops *mops)
{
    const struct mp_compute_ops *cops = s->cops;
    char names[256];
    if (compute_virtual(cops) != comm_virtual(mops)) {
        if (compute_virtual(cops))
            mp_usage("--backend %s needs a virtual --comm (built: %s) and the reverse: the model "
                     "replaces the hardware as a whole", cops->name,
                     mp_comm_names_where(comm_virtual, names, sizeof names));
        else
            mp_usage("--comm %s needs a virtual --backend (built: %s) and the reverse: the model "
                     "replaces the hardware as a whole", mops->name,
                     mp_compute_names_where(compute_virtual, names, sizeof names));
        return MP_ERR_USAGE;
    }
    if (cops->memory == MP_MEMORY_DEVICE && mops->memory == MP_MEMORY_HOST) {
        mp_usage("--backend %s keeps its buffers on the GPU; --comm %s moves host memory: use "
                 "a --comm that runs on the device (built: %s)", cops->name, mops->name,
                 mp_comm_names_where(comm_on_device, names, sizeof names));
        return MP_ERR_USAGE;
    }
    if (cops->memory == MP_MEMORY_HOST && mops->memory == MP_MEMORY_DEVICE) {
        mp_usage("--comm %s runs its collectives on the device: it needs a --backend on the "
                 "device (built: %s)", mops->name,
                 mp_compute_names_where(compute_on_device, names, sizeof names));
        return MP_ERR_USAGE;
    }
    if (s->o.cpu_bind && strcmp(s->o.cpu_bind, "gpu") == 0 && !compute_on_device(cops)) {
        mp_usage("--cpu-bind gpu: --backend %s drives no GPU; accepted here: auto, none "
                 "(gpu needs a --backend that drives a GPU; built: %s)", cops->name,
                 mp_compute_names_where(compute_on_device, names, sizeof names));
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* Set the string option *field to a copy of `value` (MP_OK, or MP_ERR_RUNTIME out of memory). */
static int set_string(char **field, const char *value)
{
    char *copy = strdup(value);
    if (!copy) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    free(*field);
    *field = copy;
    return MP_OK;
}

/* The model replaces compute and communication together: --backend model alone takes the virtual
 * comm too, and --comm model alone the virtual backend (an explicit pair is left as given, for
 * check_pairing to judge). */
static int pair_model_backends(struct mp_session *s, int argc, char **argv)
{
    const struct mp_compute_ops *cops = NULL;
    const struct mp_comm_ops *mops = NULL;
    if (mp_compute_find(s->o.backend, &cops) != MP_OK || mp_comm_find(s->o.comm, &mops) != MP_OK)
        return MP_OK; /* refused where the backends are looked up, naming the flag */
    if (compute_virtual(cops) && !mp_flag_given(argc, argv, "comm"))
        for (int i = 0; mp_comm_backends[i]; i++)
            if (comm_virtual(mp_comm_backends[i]))
                return set_string(&s->o.comm, mp_comm_backends[i]->name);
    if (comm_virtual(mops) && !mp_flag_given(argc, argv, "backend"))
        for (int i = 0; mp_compute_backends[i]; i++)
            if (compute_virtual(mp_compute_backends[i]))
                return set_string(&s->o.backend, mp_compute_backends[i]->name);
    return MP_OK;
}

/* The virtual (model) backends replace compute and communication together (check_pairing); they
 * take a cluster profile (--cluster, else MP_DEFAULT_CLUSTER, said in the console) and a virtual
 * world (--world, else the first --layout's tp·ep, else one node of the profile). */
static int model_setup(struct mp_session *s, struct mp_comm_params *params)
{
    if (!compute_virtual(s->cops))
        return MP_OK;
    int has_cluster = 0;
    for (int i = 0; s->table[i].name; i++)
        has_cluster |= strcmp(s->table[i].name, "cluster") == 0;
    if (!has_cluster) {
        mp_usage("--backend %s: %s measures hardware only; model runs are made by "
                 "moeperf-layer, moeperf-a2a, moeperf-ffn and moeperf-plan", s->cops->name,
                 s->tool);
        return MP_ERR_USAGE;
    }
    s->cluster_default = !s->o.cluster;
    if (s->cluster_default && set_string(&s->o.cluster, MP_DEFAULT_CLUSTER) != MP_OK)
        return MP_ERR_RUNTIME;
    if (mp_cluster_resolve(s->o.cluster, &s->cluster) != MP_OK)
        return MP_ERR_USAGE;
    int world = s->o.world;
    if (world < 1 && s->o.layout.n > 0) {
        struct mp_layout first;
        if (mp_layout_parse(s->o.layout.v[0], &first) != MP_OK)
            return MP_ERR_USAGE;
        world = first.tp * first.ep;
    }
    if (world < 1) /* one node of the profile */
        world = s->cluster.gpus_per_node > 0 ? s->cluster.gpus_per_node : 1;
    s->modelled = 1;
    params->world = world;
    params->gpus_per_node = s->cluster.gpus_per_node;
    return MP_OK;
}

/* --out checked by rank 0 (check_out_dir) and run.json begun in memory; every rank learns whether
 * it passed. MP_OK or MP_ERR_USAGE. The directory is made by mp_session_make_out. */
static int open_out(struct mp_session *s, const char *tool, int argc, char **argv)
{
    int rc = s->comm->rank == 0 ? check_out_dir(s, tool) : MP_OK;
    int ok = rc == MP_OK; /* every rank learns whether rank 0 could create it */
    s->comm->ops->bcast(s->comm, &ok, sizeof ok);
    if (!ok)
        return MP_ERR_USAGE;
    if (s->comm->rank == 0)
        s->run = mp_runjson_new(tool, argc, argv);
    return MP_OK;
}

/* A comm backend on the device (NCCL) bound to the compute backend's stream, under the watchdog
 * (a wrong NCCL_SOCKET_IFNAME hangs the communicators' set-up). */
static int bind_comm_device(struct mp_session *s)
{
    int rc = mp_watchdog_start();
    if (rc != MP_OK)
        return rc;
    void *stream = s->cops->native_stream ? s->cops->native_stream(s->dev) : NULL;
    if (!stream) { /* check_pairing refused a host backend; a device backend gives its stream */
        mp_error("internal error: the %s compute backend has no device stream", s->cops->name);
        return MP_ERR_RUNTIME;
    }
    return s->comm->ops->bind_device(s->comm, stream, s->cops->elem_size);
}

/* run.json's start: the model, the cluster profile of a modelled run and a deliberate slow-down,
 * written at once. */
static int note_start(struct mp_session *s)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", s->model.name);
    cJSON_AddNumberToObject(m, "hidden", s->model.hidden);
    cJSON_AddNumberToObject(m, "ffn", s->model.ffn);
    cJSON_AddNumberToObject(m, "experts", s->model.experts);
    cJSON_AddNumberToObject(m, "topk", s->model.topk);
    cJSON_AddNumberToObject(m, "shared", s->model.shared);
    cJSON_AddNumberToObject(m, "layers", s->model.layers);
    mp_session_note(s, "model", m);
    if (s->o.gemm) /* what the FFN ran as (resume_check.c compares it) */
        mp_session_note(s, "gemm", cJSON_CreateString(s->o.gemm));
    if (s->modelled) {
        cJSON *cl = cJSON_CreateObject();
        cJSON_AddStringToObject(cl, "name", s->cluster.name);
        for (int i = 0; i < mp_cluster_nparams; i++) {
            double *v = mp_cluster_param_ptr(&s->cluster, i);
            cJSON_AddNumberToObject(cl, mp_cluster_params[i].key,
                                    v ? *v : (double)s->cluster.gpus_per_node);
        }
        mp_session_note(s, "cluster", cl);
    }
    if (s->comm->inject_delay_us > 0) { /* a deliberately slowed run must say so */
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "inject_delay_us", s->comm->inject_delay_us);
        mp_session_note(s, "debug", d);
    }
    return mp_session_save_run(s);
}

/* One rank failing alone would leave the others waiting in a collective, and its own device
 * waiting on collectives they will never join: drop the device communicators before anything
 * waits for the device (freeing memory does), then end without MPI, with status rc (the launcher
 * ends the other ranks). */
static void end_alone(struct mp_session *s, int rc)
{
    fflush(stdout);
    fflush(stderr);
    if (s->comm->ops->abort)
        s->comm->ops->abort(s->comm);
    _exit(rc);
}

/* Rank 0, as --out is made: the writer lock (check_out_dir took it where the directory had one),
 * signed with this process's pid and host. MP_OK, or MP_ERR_USAGE when another run writes there. */
static int take_lock(struct mp_session *s)
{
    char holder[256];
    enum mp_runlock_state lock = MP_RUNLOCK_TAKEN;
    if (!s->locked && mp_runlock_take(s->o.out, 1, &lock, &s->lock_fd, holder, sizeof holder) !=
                          MP_OK)
        return MP_ERR_RUNTIME;
    if (lock == MP_RUNLOCK_HELD) {
        mp_usage("--out: '%s' is being written by %s, which made it after this run started; "
                 "nothing was written: wait until that run ends, or give another directory",
                 s->o.out, holder);
        if (s->comm->size > 1) /* the other ranks are measuring: a refusal of this rank alone */
            end_alone(s, MP_ERR_USAGE);
        return MP_ERR_USAGE;
    }
    s->locked = 1;
    return mp_runlock_sign(s->lock_fd, s->o.out);
}

int mp_session_make_out(struct mp_session *s)
{
    if (!s->o.out || s->out_made || s->comm->rank != 0)
        return MP_OK;
    int rc = mp_mkdir_p(s->o.out, "--out");
    if (rc == MP_OK)
        rc = take_lock(s);
    if (rc == MP_OK && s->out_replace) { /* --force: the old run goes whole, now that a new one
                                           * has a row (its lock, now this run's, stays) */
        char failed[4096];
        if (mp_remove_contents(s->o.out, MP_RUNLOCK_FILE, failed, sizeof failed) != 0) {
            mp_error("--force: cannot remove '%s' from the old run: %s", failed, strerror(errno));
            return MP_ERR_RUNTIME;
        }
        s->out_replace = 0;
    }
    if (rc == MP_OK && s->run)
        rc = mp_runjson_write(s->run, s->o.out, 0);
    s->out_made = rc == MP_OK;
    return rc;
}

int mp_session_save_run(struct mp_session *s)
{
    return s->run && s->out_made ? mp_runjson_write(s->run, s->o.out, 0) : MP_OK;
}

int mp_session_start(struct mp_session *s, const char *tool, const struct mp_opt *table,
                     const char *summary, int argc, char **argv)
{
    memset(s, 0, sizeof *s);
    s->tool = tool;
    s->table = table;
    mp_log_init(tool, mp_launcher_rank());
    /* fields a binary's table leaves out keep neutral values */
    s->o.experts = s->o.topk = s->o.shared = s->o.hidden = s->o.ffn = s->o.layers = -1;
    s->o.seq = 1;
    int rc = mp_opts_parse(table, &s->o, argc, argv, mp_bench_help(summary), NULL, NULL);
    if (rc != MP_OK)
        return rc;
    rc = mp_batch_flags_check(&s->o, argc, argv);
    if (rc != MP_OK)
        return rc;
    rc = check_out_flags(s);
    if (rc != MP_OK)
        return rc;
    mp_progress_enable(!s->o.quiet);
    if (mp_bench_model(&s->o, &s->model) != MP_OK)
        return MP_ERR_USAGE;
    rc = pair_model_backends(s, argc, argv);
    if (rc != MP_OK)
        return rc;
    rc = mp_compute_find(s->o.backend, &s->cops);
    if (rc != MP_OK)
        return rc;
    const struct mp_comm_ops *mops;
    rc = mp_comm_find(s->o.comm, &mops);
    if (rc != MP_OK)
        return rc;
    rc = check_pairing(s, mops);
    if (rc != MP_OK)
        return rc;
    struct mp_comm_params params = {0};
    rc = model_setup(s, &params);
    if (rc != MP_OK)
        return rc;
    /* the device first, MPI after: an MPI built with GPU support makes a context on the current
     * device in MPI_Init (device 0 on every rank of a host unless one is chosen); the launcher's
     * local rank is all there is to go by before MPI starts, and cops->init checks it after */
    const char *early_var = NULL;
    int early_local = s->modelled || !s->cops->preselect ? -1 : mp_local_rank_env(&early_var);
    if (early_local >= 0) {
        rc = s->cops->preselect(early_local);
        if (rc != MP_OK)
            return rc;
    }
    rc = mops->init(&s->comm, &argc, &argv, &params);
    if (rc != MP_OK)
        return rc;
    s->started_comm = 1;
    s->comm->inject_delay_us = s->o.inject_delay_us > 0 ? s->o.inject_delay_us : 0;
    s->comm->timeout_s = s->o.timeout > 0 ? s->o.timeout : 0;
    mp_log_init(tool, s->comm->rank);
    if (!s->modelled && s->o.world > 0 && s->o.world != s->comm->size) { /* every rank alike */
        mp_usage("--world %d: sets the virtual ranks of --backend model; this measured run has the "
                 "%d rank(s) its launcher started (mpirun -np)", s->o.world, s->comm->size);
        return MP_ERR_USAGE;
    }
    if (s->o.out) {
        rc = open_out(s, tool, argc, argv);
        if (rc != MP_OK)
            return rc;
    }
    const char *local_rank_from = "model";
    if (!s->modelled) {
        rc = mp_local_rank_resolve(s->comm, &local_rank_from);
        if (rc != MP_OK)
            return rc;
    }
    rc = s->cops->init(&s->dev, s->comm->local_rank);
    if (rc != MP_OK)
        return rc;
    if (!s->modelled) {
        char bound_to[512];
        mp_cpu_bind_apply(s->o.cpu_bind, gpu_pci(s), bound_to, sizeof bound_to);
    }
    if (gpu_pci(s) && s->comm->size > 1) {
        rc = check_gpus_distinct(s);
        if (rc != MP_OK)
            return rc;
    }
    if (s->comm->ops->bind_device) {
        rc = bind_comm_device(s);
        if (rc != MP_OK)
            return rc;
    }
    rc = note_ranks(s, local_rank_from);
    if (rc == MP_OK && s->run)
        rc = note_start(s);
    return rc;
}

void mp_session_virtual_rank(const struct mp_session *s, struct mp_comm *c,
                             struct mp_compute *dev, struct mp_session *out)
{
    *out = *s;
    out->comm = c;
    out->cops = &mp_compute_model;
    out->dev = dev;
    if (c->rank != 0)
        out->run = NULL;
}

const char *mp_session_backends(const struct mp_session *s, char *buf, size_t len)
{
    if (s->modelled)
        snprintf(buf, len, "backend %s, comm %s, cluster %s%s", s->o.backend, s->o.comm,
                 s->cluster.name, s->cluster_default ? " (the default; --cluster to choose)" : "");
    else
        snprintf(buf, len, "backend %s, comm %s", s->o.backend, s->o.comm);
    return buf;
}

const char *mp_session_workload(const struct mp_session *s, char *buf, size_t len)
{
    const struct mp_model *m = &s->model;
    char over[160], backends[256];
    int changed = mp_model_overrides(m, over, sizeof over);
    snprintf(buf, len, "model %s%s%s (H %d, D %d, E %d, top-%d, %d shared), %d ranks on %d "
             "node(s), %s", m->name, changed ? " with " : "", over, m->hidden, m->ffn,
             m->experts, m->topk, m->shared, s->comm->size, s->comm->nnodes,
             mp_session_backends(s, backends, sizeof backends));
    return buf;
}

const char *mp_session_source(const struct mp_session *s)
{
    return s->modelled ? "model" : "measured";
}

int mp_session_profiled(const struct mp_session *s) { return s->modelled; }

int mp_session_ranks_per_node(const struct mp_session *s)
{
    const struct mp_comm *c = s->comm;
    if (s->modelled)
        return s->cluster.gpus_per_node;
    return c->nnodes > 0 && c->size >= c->nnodes ? c->size / c->nnodes : 1;
}

int mp_session_layouts(const struct mp_session *s, struct mp_layout **out, int *n)
{
    return mp_layouts_resolve(&s->o.layout, s->comm->size, s->modelled, out, n);
}

int mp_session_watch_start(const struct mp_session *s)
{
    return s->modelled ? MP_OK : mp_watchdog_start();
}

void mp_session_watch(const struct mp_session *s, const char *label)
{
    if (!s->modelled)
        mp_watchdog_arm(s->o.timeout, label);
}

void mp_session_unwatch(const struct mp_session *s)
{
    if (!s->modelled)
        mp_watchdog_disarm();
}

struct each_rank {
    const struct mp_session *s;
    int (*fn)(struct mp_session *rank, void *arg);
    void *arg;
};

static int virtual_rank(struct mp_comm *c, struct mp_compute *dev, void *arg)
{
    const struct each_rank *e = arg;
    struct mp_session rank;
    mp_session_virtual_rank(e->s, c, dev, &rank);
    return e->fn(&rank, e->arg);
}

int mp_session_each_rank(struct mp_session *s, int (*fn)(struct mp_session *rank, void *arg),
                         void *arg)
{
    if (!s->modelled)
        return fn(s, arg);
    struct each_rank e = {.s = s, .fn = fn, .arg = arg};
    return mp_vrun_world(&s->cluster, &s->model, s->comm->size, virtual_rank, &e);
}

const char *mp_session_rank_host(const struct mp_session *s, int r)
{
    if (s->modelled || !s->run)
        return "";
    const cJSON *o = cJSON_GetArrayItem(cJSON_GetObjectItem(s->run, "ranks"), r);
    const char *h = cJSON_GetStringValue(cJSON_GetObjectItem(o, "host"));
    return h ? h : "";
}

int mp_session_layer_create(const struct mp_session *s, struct mp_layer **out, long max_tokens,
                            int max_overlap)
{
    *out = NULL;
    if (s->modelled)
        return MP_OK;
    return mp_layer_create(out, s->cops, s->dev, s->comm, &s->model, (uint64_t)s->o.seed,
                           max_tokens, s->o.max_memory, max_overlap);
}

int mp_session_layer_point(const struct mp_session *s, struct mp_layer *L, int tp, int ep,
                           const struct mp_point *pt, struct mp_point_result *res)
{
    if (s->modelled)
        return mp_vrun_point(&s->cluster, &s->model, tp, ep, (uint64_t)s->o.seed, pt, res);
    return mp_layer_run(L, pt, res);
}

int mp_session_refuse_unsupported(const struct mp_session *s)
{
    if (s->o.check && s->cops->memory == MP_MEMORY_VIRTUAL) { /* holds and computes nothing */
        mp_usage("--check compares data, and the %s backends move none; drop --check",
                 s->cops->name);
        return MP_ERR_USAGE;
    }
    if (s->o.inject_delay_us > 0 && s->modelled) { /* virtual: no wire to slow */
        mp_usage("--inject-delay-us: the model backends have no link to slow; model a slower link "
                 "with a cluster profile of lower intra_bw/inter_bw (--cluster FILE), or drop "
                 "--inject-delay-us");
        return MP_ERR_USAGE;
    }
    if (s->o.max_memory > 0 && s->modelled) { /* virtual: no buffers to bound */
        mp_usage("--max-memory: the model's virtual ranks hold no buffers, so there is nothing "
                 "to bound; drop --max-memory");
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

double mp_session_elem_bytes(const struct mp_session *s)
{
    return s->modelled ? s->cluster.elem_bytes : (double)s->cops->elem_size;
}

void mp_session_note(struct mp_session *s, const char *key, cJSON *value)
{
    if (!s->run) {
        cJSON_Delete(value);
        return;
    }
    cJSON_DeleteItemFromObject(s->run, key);
    cJSON_AddItemToObject(s->run, key, value);
}

/* Keep the --timeout deadline armed through a teardown, naming what came before it. */
static void arm_teardown(struct mp_session *s)
{
    if (!s->started_comm || s->modelled || s->o.timeout <= 0)
        return;
    static const char prefix[] = "teardown after ";
    const char *before = mp_watchdog_label();
    char label[600];
    if (strncmp(before, prefix, sizeof prefix - 1) == 0)
        snprintf(label, sizeof label, "%s", before);
    else
        snprintf(label, sizeof label, "%s%s", prefix, before);
    mp_watchdog_arm(s->o.timeout, label);
}

/* Whether a failure with `rc` may be this rank's alone: the others then never join what it has
 * queued, nor what it would wait for. */
static int failing_alone(const struct mp_session *s, int rc)
{
    return s->started_comm && rc != MP_OK && rc != MP_HELP && rc != MP_ERR_USAGE && !s->agreed &&
           s->comm->size > 1;
}

int mp_session_fail(struct mp_session *s, int rc)
{
    if (rc == MP_OK || rc == MP_HELP)
        return rc;
    arm_teardown(s);
    if (failing_alone(s, rc) && s->comm->ops->abort)
        s->comm->ops->abort(s->comm);
    return rc;
}

int mp_session_end(struct mp_session *s, int rc)
{
    /* teardown waits for the device, and the device for collectives whose peers may be gone:
     * keep the deadline armed through it */
    arm_teardown(s);
    mp_progress_clear();
    if (s->run) { /* a run refused or failed before its first row leaves no --out */
        if (rc == MP_OK && !s->out_made) /* a whole run with no row: its run.json alone */
            mp_session_make_out(s);
        if (rc != MP_OK && rc != MP_HELP) /* why it stopped (the rows so far stay) */
            mp_session_note(s, "error", cJSON_CreateString(*mp_log_last() ? mp_log_last()
                                                                          : "stopped by an error"));
        if (s->out_made)
            mp_runjson_write(s->run, s->o.out, rc == MP_OK);
        cJSON_Delete(s->run);
        s->run = NULL;
    }
    if (failing_alone(s, rc))
        end_alone(s, rc);
    if (s->dev)
        s->cops->fini(s->dev);
    if (s->started_comm)
        s->comm->ops->fini(s->comm);
    mp_watchdog_disarm();
    mp_opts_free(s->table, &s->o);
    return rc == MP_HELP ? 0 : rc;
}
