/* format.c - printf into a string of its own size (format.h): measured by one vsnprintf, written
 * by a second, so every allocation is moeperf's own (a leak in it is named by its caller). */
#include "format.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

char *mp_vformat(const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && vsnprintf(s, (size_t)n + 1, fmt, again) != n) {
        free(s);
        s = NULL;
    }
    va_end(again);
    if (!s && n >= 0)
        errno = ENOMEM;
    return s;
}

char *mp_format(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = mp_vformat(fmt, ap);
    va_end(ap);
    return s;
}
