/* runlock.h - one writer per run directory: an advisory lock on a file in it. */
#ifndef MP_RUNLOCK_H
#define MP_RUNLOCK_H

#include <stddef.h>

/* The lock file of a run directory; flock(2) on it, held until the writer ends (the kernel drops
 * it when the process exits, killed or not). --force's clearing keeps it. */
#define MP_RUNLOCK_FILE ".moeperf.lock"

/* What mp_runlock_take found: the lock taken (*fd set), no lock file (with create 0), or the
 * lock held by another process. */
enum mp_runlock_state { MP_RUNLOCK_TAKEN, MP_RUNLOCK_ABSENT, MP_RUNLOCK_HELD };

/* Take the lock of run directory `dir` without waiting: its lock file created when `create`, else
 * only taken when it is there. With MP_RUNLOCK_HELD, holder (len bytes) names the writer as its
 * lock file says ("pid P on host H"). MP_OK with *state set, or MP_ERR_RUNTIME after a message
 * (the file cannot be opened or locked). */
int mp_runlock_take(const char *dir, int create, enum mp_runlock_state *state, int *fd,
                    char *holder, size_t len);

/* Write this process's pid and host into the lock file held as fd (what a refused second writer
 * is told). MP_OK or MP_ERR_RUNTIME after a message. */
int mp_runlock_sign(int fd, const char *dir);

#endif
