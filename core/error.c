/* error.c - the logging half of error.h: every message goes to stderr with who printed it. */
#include "error.h"

#include <stdarg.h>
#include <unistd.h>

static const char *log_prog = "moeperf";
static int log_rank = -1;

void mp_log_init(const char *prog, int rank)
{
    if (prog)
        log_prog = prog;
    log_rank = rank;
}

const char *mp_prog(void) { return log_prog; }
int mp_log_rank(void) { return log_rank; }

void mp_usage(const char *fmt, ...)
{
    if (log_rank > 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", log_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void mp_warn(const char *fmt, ...)
{
    if (log_rank > 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: warning: ", log_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void mp_error_at(const char *file, int line, const char *fmt, ...)
{
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    va_list ap;
    va_start(ap, fmt);
    if (log_rank >= 0)
        fprintf(stderr, "%s: rank %d host %s %s:%d: ", log_prog, log_rank, host, file, line);
    else
        fprintf(stderr, "%s: host %s %s:%d: ", log_prog, host, file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
