/* watchdog.h - keeps a sweep from hanging: a thread that ends the process with a message naming
 * the point when a point outlives --timeout (a dead rank or link leaves MPI waiting forever), and a
 * SIGTERM/SIGINT handler that names the point the run was stopped in. Completed rows are already
 * flushed, so --resume finishes the sweep. */
#ifndef MP_WATCHDOG_H
#define MP_WATCHDOG_H

/* Start the watchdog thread and install the signal handlers (once per process). */
int mp_watchdog_start(void);

/* Arm for `seconds` (≤ 0: no deadline) with `label` naming the point ("layout tp1ep2 routing
 * uniform placement contiguous batch 64"); the message says this rank and host. */
void mp_watchdog_arm(double seconds, const char *label);

/* What the armed point's messages name ("rank 3 (host n1) at point …"), or "no point" when
 * nothing is armed; for a backend that reports a failure itself. */
const char *mp_watchdog_point(void);

/* The point completed. */
void mp_watchdog_disarm(void);

/* Call fn(arg) when the deadline passes, before the process ends (a comm backend aborts its
 * communicators there). One hook; a later call replaces it. */
void mp_watchdog_on_expire(void (*fn)(void *), void *arg);

#endif
