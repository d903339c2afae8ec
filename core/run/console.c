/* console.c - progress line and launcher rank (see console.h). */
#include "console.h"

#include "schema.h"
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int progress_shown;

void mp_progress(int done, int total, const char *label)
{
    if (!isatty(STDERR_FILENO))
        return;
    fprintf(stderr, "\r\033[K[%d/%d] %s", done, total, label);
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
