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

/* The label of the latest arm ("start-up" before the first), for a later arm that names what
 * came before ("teardown after …"). */
const char *mp_watchdog_label(void);

/* Whether the deadline has passed. The watchdog thread then prints its message and leaves a
 * thread that polls this (a comm backend waiting on its communicators) a grace period of 2 s to
 * abort what it waits on and _exit itself; after that it ends the process from its own thread. */
int mp_watchdog_expired(void);

#endif
