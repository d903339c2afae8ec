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

/* "prog: <kind>message" on stderr, from rank 0 (or a process without a rank) only. */
static void say_once(const char *kind, const char *fmt, va_list ap)
{
    if (log_rank > 0)
        return;
    fprintf(stderr, "%s: %s", log_prog, kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void mp_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say_once("", fmt, ap);
    va_end(ap);
}

void mp_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say_once("warning: ", fmt, ap);
    va_end(ap);
}

void mp_error_at(const char *file, int line, const char *fmt, ...)
{
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    /* one write, so the messages of ranks that fail together do not interleave mid-line */
    char msg[2048];
    int n = log_rank >= 0 ? snprintf(msg, sizeof msg, "%s: rank %d host %s %s:%d: ", log_prog,
                                     log_rank, host, file, line)
                          : snprintf(msg, sizeof msg, "%s: host %s %s:%d: ", log_prog, host, file, line);
    if (n < 0)
        n = 0;
    if (n < (int)sizeof msg - 1) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
        va_end(ap);
        n = m < 0 ? n : n + m;
    }
    if (n > (int)sizeof msg - 2)
        n = (int)sizeof msg - 2;
    msg[n++] = '\n';
    fflush(stderr);
    if (write(STDERR_FILENO, msg, (size_t)n) < 0)
        n = 0;
}
