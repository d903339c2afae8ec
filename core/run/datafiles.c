/* datafiles.c - where the tools find their data files (datafiles.h). */
#include "datafiles.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "files.h"

/* The source tree this binary was built from, as mp_data_root looks for it: 0 or -1. */
static int source_root(char *root, size_t size)
{
    char exe[PATH_MAX], p[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -1;
    *slash = '\0'; /* exe = BUILD/reports, BUILD/planner or BUILD/bench */
    snprintf(p, sizeof p, "%s/../../plots/render", exe);
    if (mp_is_regular_file(p)) {
        snprintf(p, sizeof p, "%s/../..", exe);
        return realpath(p, root) && strlen(root) < size ? 0 : -1;
    }
    snprintf(p, sizeof p, "%s/../meson-info/meson-info.json", exe);
    FILE *f = fopen(p, "r");
    if (!f)
        return -1;
    char text[16384];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    cJSON *j = cJSON_Parse(text);
    const cJSON *src = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "directories"), "source");
    int rc = -1;
    if (cJSON_IsString(src) && strlen(src->valuestring) < size) {
        snprintf(p, sizeof p, "%s/plots/render", src->valuestring);
        if (mp_is_regular_file(p)) {
            snprintf(root, size, "%s", src->valuestring);
            rc = 0;
        }
    }
    cJSON_Delete(j);
    return rc;
}

/* 1 when dir holds plots/render. */
static int holds_render(const char *dir)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/plots/render", dir);
    return mp_is_regular_file(p);
}

int mp_data_root(char *root, size_t size)
{
    const char *env = getenv(MP_DATA_ENV);
    if (env && *env && strlen(env) < size && holds_render(env)) {
        snprintf(root, size, "%s", env);
        return 0;
    }
    if (source_root(root, size) == 0)
        return 0;
    snprintf(root, size, "%s", MOEPERF_DATADIR);
    return holds_render(MOEPERF_DATADIR) ? 0 : -1;
}
