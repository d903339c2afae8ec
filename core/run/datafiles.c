/* srcroot.c - the source tree a reports tool was built from (srcroot.h). */
#include "srcroot.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files.h"

int rp_source_root(char *root, size_t size)
{
    char exe[PATH_MAX], p[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -1;
    *slash = '\0'; /* exe = BUILD/reports */
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
