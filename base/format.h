/* format.h - printf into a string of its own size, allocated here. */
#ifndef MP_FORMAT_H
#define MP_FORMAT_H

#include <stdarg.h>

/* The text printf would print for fmt and its arguments, in a malloc'd string the caller frees;
 * NULL (errno ENOMEM or the formatting error) when it cannot be made. */
char *mp_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *mp_vformat(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

#endif
