/* registry.h - what the compute and comm backend registries share: the kinds of memory a backend
 * works on, and lookup by name with the usage message that names the built backends. */
#ifndef MP_REGISTRY_H
#define MP_REGISTRY_H

#include <stddef.h>

/* Where a backend's buffers live: host memory, device memory (a device comm backend orders its
 * collectives with the compute backend's stream), or nowhere: a virtual backend moves no data and
 * its durations come from a model of the hardware. A compute and a comm backend run together only
 * when both are of the same kind. */
enum mp_memory_kind { MP_MEMORY_HOST, MP_MEMORY_DEVICE, MP_MEMORY_VIRTUAL };

/* A backend of the source tree this binary was configured without, and what builds it. */
struct mp_backend_absent {
    const char *name, *hint;
};

/* config.h's backend lists are X-macros LIST(BUILT, ABSENT) of entries BUILT(name) and
 * ABSENT(name, hint) (meson.build's compute_backends and comm_backends, in order). These expand
 * an entry into the registries' tables. */
#define MP_REGISTRY_SKIP(n)
#define MP_REGISTRY_SKIP_ABSENT(n, hint)
#define MP_REGISTRY_NAME(n) #n,
#define MP_REGISTRY_NAME_ABSENT(n, hint) #n,
#define MP_REGISTRY_ABSENT_ENTRY(n, hint) {#n, hint},
/* Every backend's name, built or not, NULL-terminated: the words a flag accepts. */
#define MP_REGISTRY_CHOICES(LIST) {LIST(MP_REGISTRY_NAME, MP_REGISTRY_NAME_ABSENT) NULL}
/* The backends left out, NULL-terminated: struct mp_backend_absent entries. */
#define MP_REGISTRY_ABSENT(LIST) {LIST(MP_REGISTRY_SKIP, MP_REGISTRY_ABSENT_ENTRY){NULL, NULL}}

/* Index of `name` among the `n` built backends, whose names name_at(i) gives; -1 after a usage
 * message naming `flag` ("--backend") and the built ones, and for a backend listed in `absent`
 * (terminated by a NULL name) what builds it. */
int mp_registry_find(const char *flag, const char *name, int n, const char *(*name_at)(int i),
                     const struct mp_backend_absent *absent);

/* mp_registry_find, then the start-up check of the backend found: MP_OK with its index in *index;
 * MP_ERR_USAGE (the lookup's message); MP_ERR_RUNTIME after an internal error naming the `kind`
 * of backend ("compute", "comm") and the fault check_at(i, why, len) wrote (it returns 1 when the
 * table of backend i is sound). */
int mp_registry_lookup(const char *flag, const char *kind, const char *name, int n,
                       const char *(*name_at)(int i), const struct mp_backend_absent *absent,
                       int (*check_at)(int i, char *why, size_t len), int *index);

/* One rule of a backend table's start-up check (mp_compute_check, mp_comm_check), in a function
 * with `char *why, size_t len` parameters that returns 1 when the table is sound: a condition the
 * table must meet, and the fault written into why when it does not (the check returns 0). */
#define MP_REGISTRY_REQUIRE(cond, ...)                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            snprintf(why, len, __VA_ARGS__);                                                       \
            return 0;                                                                              \
        }                                                                                          \
    } while (0)

/* Append `word` to the '|'-joined list in buf (truncating at len). */
void mp_registry_append(char *buf, size_t len, const char *word);

#endif
