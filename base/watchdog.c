/* watchdog.c - the per-point deadline and the stop-signal message (see watchdog.h). */
#include "watchdog.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "error.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct timespec deadline; /* CLOCK_MONOTONIC; tv_sec 0: disarmed */
static double armed_seconds;
/* What a message says; written before arming, read by the thread and the signal handler. */
static char message[1024];
static volatile sig_atomic_t message_len;
static char last_label[512]; /* the label of the latest arm */
static int started;
static volatile sig_atomic_t expired;

/* How long the watchdog leaves a thread that polls (mp_watchdog_expired) to end the process
 * itself, aborting what it polls, before it ends the process from its own thread. */
#define GRACE_US 2000000

int mp_watchdog_expired(void) { return expired; }

static void *watch(void *arg)
{
    pthread_mutex_lock(&lock);
    for (;;) {
        if (deadline.tv_sec == 0) {
            pthread_cond_wait(&changed, &lock);
            continue;
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > deadline.tv_sec ||
            (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec)) {
            char out[1400];
            int n = snprintf(out, sizeof out,
                             "%s: %.*s did not complete within --timeout %g s (a rank or a link "
                             "stopped answering); completed rows are kept, --resume finishes the "
                             "sweep\n",
                             mp_prog(), (int)message_len, message, armed_seconds);
            if (write(STDERR_FILENO, out, (size_t)(n < (int)sizeof out ? n : (int)sizeof out - 1)) < 0)
                n = 0;
            /* a polling thread aborts its communicators and exits (never this thread: NCCL's
             * calls on one communicator must not run in two threads at once); one blocked for
             * ever in a call that does not poll is ended here after the grace period */
            expired = 1;
            pthread_mutex_unlock(&lock);
            usleep(GRACE_US);
            _exit(MP_ERR_RUNTIME);
        }
        /* sleep in short steps: the condition variable waits on the realtime clock */
        pthread_mutex_unlock(&lock);
        usleep(20000);
        pthread_mutex_lock(&lock);
    }
    return arg;
}

static void on_stop(int sig)
{
    static const char stopped[] = " stopped by a signal during ";
    const char *prog = mp_prog();
    if (write(STDERR_FILENO, prog, strlen(prog)) < 0 ||
        write(STDERR_FILENO, ":", 1) < 0 ||
        write(STDERR_FILENO, stopped, sizeof stopped - 1) < 0 ||
        write(STDERR_FILENO, message, (size_t)message_len) < 0 ||
        write(STDERR_FILENO, "; completed rows are kept\n", 26) < 0)
        sig = 0;
    _exit(sig == SIGINT ? 130 : MP_ERR_RUNTIME);
}

int mp_watchdog_start(void)
{
    if (started)
        return MP_OK;
    pthread_t t;
    if (pthread_create(&t, NULL, watch, NULL) != 0) {
        mp_error("cannot start the --timeout watchdog thread");
        return MP_ERR_RUNTIME;
    }
    pthread_detach(t);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    started = 1;
    return MP_OK;
}

const char *mp_watchdog_point(void)
{
    return message_len > 0 ? message : "no point";
}

const char *mp_watchdog_label(void)
{
    return last_label[0] ? last_label : "start-up";
}

void mp_watchdog_arm(double seconds, const char *label)
{
    pthread_mutex_lock(&lock);
    int rank = mp_log_rank();
    char host[128] = "?";
    gethostname(host, sizeof host - 1);
    message_len = 0;
    int n = snprintf(message, sizeof message, "rank %d (host %s) at point %s", rank < 0 ? 0 : rank,
                     host, label);
    message_len = n < (int)sizeof message ? n : (int)sizeof message - 1;
    if (label != last_label)
        snprintf(last_label, sizeof last_label, "%s", label);
    armed_seconds = seconds;
    deadline.tv_sec = 0;
    if (seconds > 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        long long ns = deadline.tv_nsec + (long long)((seconds - (long long)seconds) * 1e9);
        deadline.tv_sec += (time_t)seconds + (time_t)(ns / 1000000000LL);
        deadline.tv_nsec = (long)(ns % 1000000000LL);
        if (deadline.tv_sec == 0)
            deadline.tv_sec = 1;
    }
    pthread_cond_signal(&changed);
    pthread_mutex_unlock(&lock);
}

void mp_watchdog_disarm(void)
{
    pthread_mutex_lock(&lock);
    deadline.tv_sec = 0;
    pthread_mutex_unlock(&lock);
}
