/* console.c - progress line and launcher rank (see console.h). */
#include "console.h"

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
