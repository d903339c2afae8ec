/* freeall.h - MP_FREE_ALL: every heap pointer of a list freed in one statement (a struct's arrays
 * in its free function). */
#ifndef MP_FREEALL_H
#define MP_FREEALL_H

#include <stddef.h>
#include <stdlib.h>

/* free() each of the n pointers of p (NULL ones included, as free allows). */
static inline void mp_free_each(void *const *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(p[i]);
}

/* MP_FREE_ALL(a, b, c): free(a), free(b), free(c). The arguments are evaluated once each. */
#define MP_FREE_ALL(...)                                                                           \
    mp_free_each((void *const[]){__VA_ARGS__},                                                     \
                 sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))

#endif
