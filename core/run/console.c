/* console.c - progress line and launcher rank (see console.h). */
#include "console.h"

#include "schema.h"
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "clock.h"

static int progress_shown, progress_on, progress_calls;
static double progress_t0, progress_first; /* µs: enabled, and the first point started */

void mp_progress_enable(int on)
{
    progress_on = on && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO);
    progress_t0 = mp_now_us();
    progress_calls = 0;
}

/* Seconds as "12 s", "3 min 05 s" or "2 h 07 min". */
static void say_seconds(char *b, size_t n, double s)
{
    long t = (long)(s + 0.5);
    if (t < 60)
        snprintf(b, n, "%ld s", t);
    else if (t < 3600)
        snprintf(b, n, "%ld min %02ld s", t / 60, t % 60);
    else
        snprintf(b, n, "%ld h %02ld min", t / 3600, t % 3600 / 60);
}

void mp_progress(int done, int total, const char *label)
{
    if (!progress_on)
        return;
    double now = mp_now_us();
    if (progress_calls++ == 0)
        progress_first = now;
    char el[32], left[64] = "";
    say_seconds(el, sizeof el, (now - progress_t0) / 1e6);
    if (progress_calls > 1 && total >= done) {
        char l[32];
        double per = (now - progress_first) / 1e6 / (progress_calls - 1);
        say_seconds(l, sizeof l, per * (total - done + 1));
        snprintf(left, sizeof left, ", about %s left", l);
    }
    char line[1024];
    int n = snprintf(line, sizeof line, "[%d/%d] %s elapsed%s: %s", done, total, el, left, label);
    struct winsize ws;
    int width = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
    if (n > 0 && n >= width) /* one line: a wrapped one would not be erased by the next */
        line[width - 1 < (int)sizeof line ? width - 1 : (int)sizeof line - 1] = '\0';
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    progress_shown = 1;
}

void mp_progress_clear(void)
{
    if (!progress_shown)
        return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    progress_shown = 0;
}

int mp_launcher_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                       "SLURM_PROCID", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v);
    }
    return -1;
}

const struct mp_summary *mp_metric_summary(const struct mp_summary *sm, const char *name)
{
    const struct mp_csv_schema *f = &mp_schema_layer_samples;
    int at = mp_schema_index(f, name) - f->key->n - 1; /* the metrics follow the key and `iter` */
    return at >= 0 ? &sm[at] : NULL;
}

void mp_console_titles(const struct mp_console_metric *cols, int n)
{
    for (int i = 0; i < n; i++)
        printf(" %*s", cols[i].width, cols[i].title);
}

void mp_console_values(const struct mp_console_metric *cols, int n, const struct mp_summary *sm)
{
    for (int i = 0; i < n; i++) {
        const struct mp_summary *m = mp_metric_summary(sm, cols[i].metric);
        double v = !m ? NAN : cols[i].p99 ? m->p99 : m->p50;
        printf(" %*.*f", cols[i].width, cols[i].prec, v);
    }
}
