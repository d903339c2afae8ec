/* rundir.c - run directories created with their parents, and run.json: what a run was, written
 * at its start and again when it ends (results.h). */
#include "results.h"

#include "clock.h"
#include "config.h"
#include "error.h"
#include "files.h"
#include "git_rev.h"
#include "topo.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int mp_mkdir_p(const char *path, const char *flag)
{
    const char *who = flag ? flag : "directory";
    int err = 0;
    size_t n = strlen(path);
    if (n == 0) {
        mp_usage("%s: cannot create directory '': %s", who, strerror(ENOENT));
        return MP_ERR_USAGE;
    }
    char *p = strdup(path);
    if (!p) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    /* visit each prefix ending before a '/' and then the whole path */
    for (size_t i = 1; i <= n && !err; i++) {
        if (i < n && p[i] != '/')
            continue;
        if (i < n && p[i - 1] == '/')
            continue; /* repeated slashes */
        char c = p[i];
        p[i] = '\0';
        struct stat st;
        if (stat(p, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                err = ENOTDIR;
        } else if (errno != ENOENT) {
            err = errno;
        } else if (mkdir(p, 0755) != 0) {
            if (errno != EEXIST || stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
                err = errno == EEXIST ? ENOTDIR : errno;
        }
        p[i] = c;
    }
    free(p);
    if (!err && access(path, W_OK | X_OK) != 0)
        err = errno;
    if (err) {
        mp_usage("%s: cannot create directory '%s': %s", who, path, strerror(err));
        return MP_ERR_USAGE;
    }
    return MP_OK;
}

/* ---- run.json ---- */

static void iso_now(char *buf, size_t n)
{
    time_t now = time(NULL);
    struct tm tm;
    if (!gmtime_r(&now, &tm) || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, n, "unknown");
}

/* The environment prefixes that change how the communication and math libraries behave. */
static const char *const env_prefixes[] = {"NCCL_",     "UCX_",  "OMPI_",
                                            "OPENBLAS_", "CUDA_", "SLURM_"};

struct cJSON *mp_runjson_new(const char *tool, int argc, char **argv)
{
    char buf[256];
    cJSON *j = cJSON_CreateObject();
    if (!j)
        goto oom;
    cJSON *build = cJSON_CreateObject(), *args = cJSON_CreateArray(), *env = cJSON_CreateObject();
    if (!build || !args || !env) {
        cJSON_Delete(build);
        cJSON_Delete(args);
        cJSON_Delete(env);
        goto oom;
    }
    cJSON_AddItemToObject(j, "tool", cJSON_CreateString(tool ? tool : ""));
    cJSON_AddItemToObject(j, "version", cJSON_CreateString(MOEPERF_VERSION));
    cJSON_AddItemToObject(j, "git_revision", cJSON_CreateString(MOEPERF_GIT_REV));
    cJSON_AddItemToObject(build, "type", cJSON_CreateString(MOEPERF_BUILDTYPE));
    cJSON_AddItemToObject(build, "compiler", cJSON_CreateString(MOEPERF_COMPILER));
    cJSON_AddItemToObject(build, "features", cJSON_CreateString(MOEPERF_FEATURES));
    cJSON_AddItemToObject(j, "build", build);
    for (int i = 0; i < argc; i++)
        cJSON_AddItemToArray(args, cJSON_CreateString(argv[i] ? argv[i] : ""));
    cJSON_AddItemToObject(j, "argv", args);
    iso_now(buf, sizeof buf);
    cJSON_AddItemToObject(j, "start", cJSON_CreateString(buf));
    if (gethostname(buf, sizeof buf - 1) != 0)
        snprintf(buf, sizeof buf, "unknown");
    buf[sizeof buf - 1] = '\0';
    cJSON_AddItemToObject(j, "host", cJSON_CreateString(buf));
    cJSON_AddItemToObject(j, "timer", cJSON_CreateString(MP_CLOCK_NAME));
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        for (size_t k = 0; k < sizeof env_prefixes / sizeof env_prefixes[0]; k++) {
            if (strncmp(*e, env_prefixes[k], strlen(env_prefixes[k])) != 0)
                continue;
            size_t nl = (size_t)(eq - *e);
            char *name = malloc(nl + 1);
            if (!name) {
                cJSON_Delete(env);
                cJSON_Delete(j);
                goto oom;
            }
            memcpy(name, *e, nl);
            name[nl] = '\0';
            cJSON_AddItemToObject(env, name, cJSON_CreateString(eq + 1));
            free(name);
            break;
        }
    }
    cJSON_AddItemToObject(j, "env", env);
    cJSON *topo = mp_topo_summary();
    cJSON_AddItemToObject(j, "topology", topo ? topo : cJSON_CreateNull());
    return j;
oom:
    cJSON_Delete(j);
    mp_error("out of memory building run.json");
    return NULL;
}

int mp_json_write(const struct cJSON *j, const char *dir, const char *name)
{
    int rc = MP_OK;
    char *text = cJSON_Print(j), *tmpname = NULL;
    char *tmp = NULL, *path = mp_path_join(dir, name);
    if (text && path && (tmpname = malloc(strlen(name) + 6)))
        sprintf(tmpname, ".%s.tmp", name);
    if (tmpname)
        tmp = mp_path_join(dir, tmpname);
    FILE *f = NULL;
    if (!text || !tmp || !path) {
        mp_error("out of memory writing %s", name);
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    f = fopen(tmp, "w");
    if (!f) {
        mp_error("%s: %s", tmp, strerror(errno));
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, f) != n || fputc('\n', f) == EOF || fflush(f) != 0;
    bad |= fclose(f) != 0;
    f = NULL;
    if (bad) {
        mp_error("%s: write failed: %s", tmp, strerror(errno));
        unlink(tmp);
        rc = MP_ERR_RUNTIME;
        goto out;
    }
    if (rename(tmp, path) != 0) {
        mp_error("%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        rc = MP_ERR_RUNTIME;
    }
out:
    cJSON_free(text);
    free(tmpname);
    free(tmp);
    free(path);
    return rc;
}

int mp_runjson_write(struct cJSON *j, const char *dir, int finished)
{
    char now[64];
    if (!j) {
        mp_error("run.json: nothing to write");
        return MP_ERR_RUNTIME;
    }
    iso_now(now, sizeof now);
    cJSON_DeleteItemFromObjectCaseSensitive(j, "end");
    cJSON_DeleteItemFromObjectCaseSensitive(j, "finished");
    cJSON_AddItemToObject(j, "end", cJSON_CreateString(now));
    cJSON_AddItemToObject(j, "finished", cJSON_CreateBool(finished));
    return mp_json_write(j, dir, "run.json");
}
