/* session.c - start-up and shut-down shared by the benchmark binaries (see session.h). */
#include "session.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "console.h"
#include "error.h"
#include "locality.h"
#include "rankmap.h"
#include "results.h"

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
    }
    free(all);
    return rc;
}

/* A run directory belongs to one tool: refuse to mix another tool's files and run.json into it. */
static int check_owner(const char *dir, const char *tool)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return MP_OK;
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    const cJSON *t = j ? cJSON_GetObjectItemCaseSensitive(j, "tool") : NULL;
    int rc = MP_OK;
    if (cJSON_IsString(t) && strcmp(t->valuestring, tool) != 0) {
        mp_usage("--out: '%s' holds a run of %s; give %s a directory of its own", dir,
                 t->valuestring, tool);
        rc = MP_ERR_USAGE;
    }
    cJSON_Delete(j);
    return rc;
}

/* The model backends replace compute and communication together; they need a cluster profile and
 * a virtual world (--world, or the first --layout's tp·ep). */
static int model_setup(struct mp_session *s, struct mp_comm_params *params)
{
    int cm = strcmp(s->o.backend, "model") == 0, mm = strcmp(s->o.comm, "model") == 0;
    if (!cm && !mm)
        return MP_OK;
    if (cm != mm) {
        mp_usage("--backend model needs --comm model and the reverse: the model replaces the "
                 "hardware as a whole");
        return MP_ERR_USAGE;
    }
    int has_cluster = 0;
    for (int i = 0; s->table[i].name; i++)
        has_cluster |= strcmp(s->table[i].name, "cluster") == 0;
    if (!has_cluster) {
        mp_usage("--backend model: %s measures hardware only; model runs are made by "
                 "moeperf-layer and moeperf-plan", s->tool);
        return MP_ERR_USAGE;
    }
    if (mp_cluster_resolve(s->o.cluster, &s->cluster) != MP_OK)
        return MP_ERR_USAGE;
    int world = s->o.world;
    if (world < 1 && s->o.layout.n > 0) {
        struct mp_layout first;
        if (mp_layout_parse(s->o.layout.v[0], &first) != MP_OK)
            return MP_ERR_USAGE;
        world = first.tp * first.ep;
    }
    if (world < 1) {
        mp_usage("--world: the model backends need the number of virtual ranks (--world N or "
                 "--layout tpXepY)");
        return MP_ERR_USAGE;
    }
    s->modelled = 1;
    params->world = world;
    params->gpus_per_node = s->cluster.gpus_per_node;
    return MP_OK;
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
    if (mp_bench_model(&s->o, &s->model) != MP_OK)
        return MP_ERR_USAGE;
    s->cops = mp_compute_find(s->o.backend);
    if (!s->cops)
        return MP_ERR_USAGE;
    const struct mp_comm_ops *mops = mp_comm_find(s->o.comm);
    if (!mops)
        return MP_ERR_USAGE;
    if (strcmp(s->o.backend, "cuda") == 0 && strcmp(s->o.comm, "mpi") == 0) {
        mp_usage("--backend cuda keeps its buffers on the GPU; --comm mpi moves host memory: use "
                 "--comm nccl");
        return MP_ERR_USAGE;
    }
    if (s->o.cpu_bind && strcmp(s->o.cpu_bind, "gpu") == 0 && strcmp(s->o.backend, "cuda") != 0) {
        mp_usage("--cpu-bind gpu: --backend %s drives no GPU; accepted here: auto, none "
                 "(gpu needs --backend cuda)", s->o.backend);
        return MP_ERR_USAGE;
    }
    struct mp_comm_params params = {0};
    rc = model_setup(s, &params);
    if (rc != MP_OK)
        return rc;
    rc = mops->init(&s->comm, &argc, &argv, &params);
    if (rc != MP_OK)
        return rc;
    s->started_comm = 1;
    s->comm->inject_delay_us = s->o.inject_delay_us > 0 ? s->o.inject_delay_us : 0;
    mp_log_init(tool, s->comm->rank);
    if (s->o.out) {
        rc = s->comm->rank == 0 ? mp_mkdir_p(s->o.out, "--out") : MP_OK;
        if (rc == MP_OK && s->comm->rank == 0)
            rc = check_owner(s->o.out, tool);
        int ok = rc == MP_OK; /* every rank learns whether rank 0 could create it */
        s->comm->ops->bcast(s->comm, &ok, sizeof ok);
        if (!ok)
            return MP_ERR_USAGE;
        if (s->comm->rank == 0)
            s->run = mp_runjson_new(tool, argc, argv);
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
    if (s->comm->ops->bind_device) {
        void *stream = s->cops->native_stream ? s->cops->native_stream(s->dev) : NULL;
        if (!stream) {
            mp_usage("--comm %s runs its collectives on the device: it needs --backend cuda",
                     s->comm->ops->name);
            return MP_ERR_USAGE;
        }
        rc = s->comm->ops->bind_device(s->comm, stream, s->cops->elem_size);
        if (rc != MP_OK)
            return rc;
    }
    rc = note_ranks(s, local_rank_from);
    if (rc == MP_OK && s->run) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "name", s->model.name);
        cJSON_AddNumberToObject(m, "hidden", s->model.hidden);
        cJSON_AddNumberToObject(m, "ffn", s->model.ffn);
        cJSON_AddNumberToObject(m, "experts", s->model.experts);
        cJSON_AddNumberToObject(m, "topk", s->model.topk);
        cJSON_AddNumberToObject(m, "shared", s->model.shared);
        cJSON_AddNumberToObject(m, "layers", s->model.layers);
        mp_session_note(s, "model", m);
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
        rc = mp_runjson_write(s->run, s->o.out, 0);
    }
    return rc;
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

int mp_session_end(struct mp_session *s, int rc)
{
    mp_progress_clear();
    if (s->run) {
        mp_runjson_write(s->run, s->o.out, rc == MP_OK);
        cJSON_Delete(s->run);
    }
    if (s->dev)
        s->cops->fini(s->dev);
    if (s->started_comm) {
        if (rc != MP_OK && rc != MP_HELP && s->comm->size > 1) {
            /* one rank failing alone would leave the others waiting in a collective */
            fflush(stdout);
            fflush(stderr);
            if (rc == MP_ERR_USAGE || s->agreed)
                s->comm->ops->fini(s->comm);
            else
                _exit(rc);
        } else {
            s->comm->ops->fini(s->comm);
        }
    }
    mp_opts_free(s->table, &s->o);
    return rc == MP_HELP ? 0 : rc;
}
