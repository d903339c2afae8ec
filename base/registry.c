/* registry.c - lookup by name in a registry of backends, shared by the compute and comm
 * registries: the usage message names the built backends, or what builds a known one. */
#include "registry.h"

#include <string.h>

#include "error.h"

void mp_registry_append(char *buf, size_t len, const char *word)
{
    size_t used = strlen(buf);
    if (used && used + 1 < len) {
        buf[used++] = '|';
        buf[used] = '\0';
    }
    if (used < len)
        strncat(buf, word, len - used - 1);
}

int mp_registry_find(const char *flag, const char *name, int n, const char *(*name_at)(int i),
                     const struct mp_backend_absent *absent)
{
    for (int i = 0; i < n; i++)
        if (strcmp(name_at(i), name) == 0)
            return i;
    char built[256] = "";
    for (int i = 0; i < n; i++)
        mp_registry_append(built, sizeof built, name_at(i));
    for (const struct mp_backend_absent *a = absent; a && a->name; a++)
        if (strcmp(a->name, name) == 0) {
            mp_usage("%s: %s is not built into this binary (built: %s); %s", flag, name, built,
                     a->hint);
            return -1;
        }
    mp_usage("%s: '%s' is not one of the built backends: %s", flag, name, built);
    return -1;
}

int mp_registry_lookup(const char *flag, const char *kind, const char *name, int n,
                       const char *(*name_at)(int i), const struct mp_backend_absent *absent,
                       int (*check_at)(int i, char *why, size_t len), int *index)
{
    int i = mp_registry_find(flag, name, n, name_at, absent);
    if (i < 0)
        return MP_ERR_USAGE;
    char why[256];
    if (!check_at(i, why, sizeof why)) {
        mp_error("internal error: the %s %s backend's table %s", name, kind, why);
        return MP_ERR_RUNTIME;
    }
    *index = i;
    return MP_OK;
}
