/* error.c - the logging half of error.h: every message goes to stderr with who printed it. */
#include "error.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *log_prog = "moeperf";
static int log_rank = -1;
static _Thread_local struct mp_log_held *held; /* this thread's messages held, or NULL */

void mp_log_hold(struct mp_log_held *h) { held = h; }

/* Out: to this thread's hold, or stderr. */
static void emit(const char *msg, size_t n)
{
    if (!held) {
        fflush(stderr);
        if (write(STDERR_FILENO, msg, n) < 0)
            n = 0;
        return;
    }
    if (held->len + n + 1 > held->cap) {
        size_t cap = (held->len + n + 1) * 2;
        char *t = realloc(held->text, cap);
        if (!t)
            return; /* out of memory: the message is lost, the status still says it failed */
        held->text = t;
        held->cap = cap;
    }
    memcpy(held->text + held->len, msg, n);
    held->len += n;
    held->text[held->len] = '\0';
}

void mp_log_held_print(struct mp_log_held *h)
{
    if (h->len)
        emit(h->text, h->len);
}

void mp_log_held_free(struct mp_log_held *h)
{
    free(h->text);
    memset(h, 0, sizeof *h);
}

void mp_log_init(const char *prog, int rank)
{
    if (prog)
        log_prog = prog;
    log_rank = rank;
}

static char last_text[512]; /* the last error or usage message, for run.json */

/* Keep the message text `t` (n bytes, no newline) as the last one. */
static void remember(const char *t, int n)
{
    if (n < 0)
        n = 0;
    if (n > (int)sizeof last_text - 1)
        n = (int)sizeof last_text - 1;
    memcpy(last_text, t, (size_t)n);
    last_text[n] = '\0';
}

const char *mp_log_last(void) { return last_text; }

const char *mp_prog(void) { return log_prog; }
int mp_log_rank(void) { return log_rank; }

/* "prog: <kind>message" on stderr, from rank 0 (or a process without a rank) only. */
static void say_once(const char *kind, const char *fmt, va_list ap)
{
    char msg[2048];
    int n = snprintf(msg, sizeof msg, "%s: %s", log_prog, kind);
    if (n < 0)
        n = 0;
    int text = n;
    if (n < (int)sizeof msg - 1) {
        int m = vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
        n = m < 0 ? n : n + m;
    }
    if (n > (int)sizeof msg - 2)
        n = (int)sizeof msg - 2;
    if (*kind == '\0') /* a usage error: the last message */
        remember(msg + text, n - text);
    if (log_rank > 0)
        return;
    msg[n++] = '\n';
    emit(msg, (size_t)n);
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
    int text = n;
    if (n < (int)sizeof msg - 1) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
        va_end(ap);
        n = m < 0 ? n : n + m;
    }
    if (n > (int)sizeof msg - 2)
        n = (int)sizeof msg - 2;
    remember(msg + text, n - text);
    msg[n++] = '\n';
    emit(msg, (size_t)n);
}
