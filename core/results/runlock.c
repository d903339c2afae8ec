/* runlock.c - one writer per run directory (runlock.h): flock(2) on DIR/.moeperf.lock, which
 * holds the writer's pid and host for the message a second writer gets. */
#include "runlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "error.h"
#include "files.h"

/* The holder's line of the lock file into holder[len] ("another process" when it says nothing). */
static void read_holder(int fd, char *holder, size_t len)
{
    char buf[256];
    ssize_t n = 0;
    /* a writer signs right after it locks: give it up to 100 ms */
    for (int i = 0; i < 20 && (n = pread(fd, buf, sizeof buf - 1, 0)) <= 0; i++)
        usleep(5000);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    snprintf(holder, len, "%s", buf[0] ? buf : "another process (its lock file names none)");
}

int mp_runlock_take(const char *dir, int create, enum mp_runlock_state *state, int *fd,
                    char *holder, size_t len)
{
    *fd = -1;
    char *path = mp_path_join(dir, MP_RUNLOCK_FILE);
    if (!path) {
        mp_error("out of memory");
        return MP_ERR_RUNTIME;
    }
    int f = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
    if (f < 0 && !create && errno == ENOENT) {
        free(path);
        *state = MP_RUNLOCK_ABSENT;
        return MP_OK;
    }
    if (f < 0) {
        mp_error("--out: cannot open the run's lock file '%s': %s", path, strerror(errno));
        free(path);
        return MP_ERR_RUNTIME;
    }
    int rc = MP_OK;
    if (flock(f, LOCK_EX | LOCK_NB) == 0) {
        *state = MP_RUNLOCK_TAKEN;
        *fd = f;
    } else if (errno == EWOULDBLOCK) {
        *state = MP_RUNLOCK_HELD;
        read_holder(f, holder, len);
        close(f);
    } else {
        mp_error("--out: cannot lock '%s': %s", path, strerror(errno));
        close(f);
        rc = MP_ERR_RUNTIME;
    }
    free(path);
    return rc;
}

int mp_runlock_sign(int fd, const char *dir)
{
    char host[256] = "unknown", line[320];
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    int n = snprintf(line, sizeof line, "pid %ld on host %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
        mp_error("--out: cannot write the lock file of '%s': %s", dir, strerror(errno));
        return MP_ERR_RUNTIME;
    }
    return MP_OK;
}
