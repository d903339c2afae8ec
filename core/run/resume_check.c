/* resume_check.c - --resume is refused, before any file is opened for writing, when the run in
 * --out was made with a setting that changes what its rows mean (resume_check.h). */
#include "resume_check.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "files.h"
#include "results.h"

/* One line naming the setting, what the old run had and what this command has. */
static int differ(const char *dir, const char *setting, const char *was, const char *now)
{
    mp_usage("--resume: the run in '%s' was made with %s %s, this command with %s; its rows "
             "would mean something else than the new ones: give another --out, or --force to "
             "replace the run", dir, setting, was, now);
    return MP_ERR_USAGE;
}

/* The string at j[a] (j[a][b] with b), or NULL. */
static const char *str_at(const cJSON *j, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, a);
    if (b)
        v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Compare the string at old[a][b] with `now` when the old run records it. */
static int same_str(const char *dir, const cJSON *old, const char *a, const char *b,
                    const char *setting, const char *now)
{
    const char *was = str_at(old, a, b);
    return !was || !now || !strcmp(was, now) ? MP_OK : differ(dir, setting, was, now);
}

/* A modelled run's cluster profile (note_start in session.c writes its name and parameters):
 * present in both runs or in neither, with the same name and every parameter equal. */
static int same_cluster(const struct mp_resume_settings *s, const cJSON *old)
{
    const char *dir = s->dir;
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(old, "cluster");
    if (!cl != !s->cluster)
        return differ(dir, "the cluster profile", cl ? str_at(old, "cluster", "name") : "none",
                      s->cluster ? s->cluster->name : "none (a measured run)");
    if (!cl)
        return MP_OK;
    struct mp_cluster now = *s->cluster; /* mp_cluster_param_ptr reads a writable profile */
    int rc = same_str(dir, old, "cluster", "name", "the cluster profile", now.name);
    for (int i = 0; i < mp_cluster_nparams && rc == MP_OK; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cl, mp_cluster_params[i].key);
        const double *p = mp_cluster_param_ptr(&now, i);
        double value = p ? *p : (double)now.gpus_per_node;
        if (!cJSON_IsNumber(v) || v->valuedouble == value)
            continue;
        char setting[96], was[48], is[48];
        snprintf(setting, sizeof setting, "the cluster profile's %s", mp_cluster_params[i].key);
        snprintf(was, sizeof was, "%.17g", v->valuedouble);
        snprintf(is, sizeof is, "%.17g", value);
        rc = differ(dir, setting, was, is);
    }
    return rc;
}

int mp_resume_check_settings(const struct mp_resume_settings *s)
{
    const char *dir = s->dir;
    char *path = mp_path_join(dir, "run.json");
    char *text = path ? mp_read_file(path, NULL) : NULL;
    free(path);
    cJSON *old = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!old)
        return MP_OK; /* check_out_dir has refused a run.json it cannot read */
    cJSON *now = mp_runjson_new(s->tool, 0, NULL);
    const cJSON *eb = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(old, "libraries"), "compute_elem_bytes");
    int rc = same_str(dir, old, "libraries", "compute", "--backend", s->backend);
    if (rc == MP_OK)
        rc = same_str(dir, old, "libraries", "comm", "--comm", s->comm);
    if (rc == MP_OK && cJSON_IsNumber(eb) && (int)eb->valuedouble != s->elem_bytes) {
        char was[24], is[24];
        snprintf(was, sizeof was, "%d", (int)eb->valuedouble);
        snprintf(is, sizeof is, "%d", s->elem_bytes);
        rc = differ(dir, "the compute element size (bytes)", was, is);
    }
    if (rc == MP_OK)
        rc = same_cluster(s, old);
    if (rc == MP_OK)
        rc = same_str(dir, old, "gemm", NULL, "--gemm", s->gemm);
    if (rc == MP_OK)
        rc = same_str(dir, old, "git_revision", NULL, "the moeperf revision",
                      str_at(now, "git_revision", NULL));
    static const char *const build[] = {"type", "compiler", "features"};
    for (int i = 0; i < 3 && rc == MP_OK; i++) {
        char setting[48];
        snprintf(setting, sizeof setting, "the build's %s", build[i]);
        rc = same_str(dir, old, "build", build[i], setting, str_at(now, "build", build[i]));
    }
    cJSON_Delete(now);
    cJSON_Delete(old);
    return rc;
}
