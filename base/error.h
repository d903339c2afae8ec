/* error.h - status codes, exit codes and logging to stderr shared by every moeperf binary. */
#ifndef MP_ERROR_H
#define MP_ERROR_H

#include <stdio.h>

/* Status codes double as process exit codes (docs/ARCHITECTURE.md, Layers). */
enum mp_status {
    MP_OK = 0,
    MP_ERR_RUNTIME = 1,    /* a measurement or library call failed */
    MP_ERR_USAGE = 2,      /* bad flag, value, file or combination */
    MP_ERR_REGRESSION = 3, /* a gate failed: moeperf-compare found a regression, or a
                            * moeperf-a2a point fell below --min-busbw */
    MP_SKIP = 77,          /* a test without the hardware it needs */
    MP_HELP = 1000,        /* --help or --version printed: exit 0 */
};

/* Set the program name and this process's rank for every later message. rank < 0: not known. */
void mp_log_init(const char *prog, int rank);

/* Messages held instead of printed: work run on several threads whose messages must come out
 * in the order a serial run prints them. */
struct mp_log_held {
    char *text;
    size_t len, cap;
};
/* From now on this thread's messages (usage, warnings, errors) go to *h (NULL: to stderr again). */
void mp_log_hold(struct mp_log_held *h);
/* Print what *h holds, as it would have been printed; free it. */
void mp_log_held_print(struct mp_log_held *h);
void mp_log_held_free(struct mp_log_held *h);
const char *mp_prog(void);
/* The text of the last error or usage message this process raised (any rank, without the
 * "prog: rank … host …" prefix); "" when none. */
const char *mp_log_last(void);
int mp_log_rank(void);

/* A usage error: one line "prog: message" on stderr, printed by rank 0 (or a single process) only,
 * since every rank parses the same arguments. */
void mp_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A runtime error: "prog: rank R host H file:line: message" on stderr, from any rank. */
void mp_error_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define mp_error(...) mp_error_at(__FILE__, __LINE__, __VA_ARGS__)

/* A warning: "prog: warning: message" on stderr, rank 0 only. */
void mp_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Propagate a failing status: on non-zero, store it in `rc` and jump to `out`. */
#define MP_CHECK(call)                                                                             \
    do {                                                                                           \
        int mp_check_rc_ = (call);                                                                 \
        if (mp_check_rc_ != MP_OK) {                                                               \
            rc = mp_check_rc_;                                                                     \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

#endif
